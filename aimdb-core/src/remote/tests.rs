//! The responder through the real tables: requests dispatched on a topic,
//! answers pulled from the routes, decoded as a host decodes them.

use std::string::String;
use std::vec::Vec;

use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use postcard_schema::schema::owned::OwnedNamedType;

use super::proto::{Body, Response};
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

const REQ: &str = "aimdb/req";
const RSP: &str = "aimdb/rsp";

/// A node: three described records, a responder, and the two tables it
/// is linked into. Each test has its own statics (tests run in parallel).
macro_rules! node {
    ($readings:ident, $led:ident, $cmd:ident, $responder:ident, $ready:ident) => {
        static $readings: Record<Cs, Ring<Reading, 4>, 1> = Record::new("readings");
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
) -> Response<Body> {
    dispatch.dispatch(REQ.as_bytes(), req).unwrap();
    let m = futures_lite_next(routes);
    assert_eq!(m.0, RSP);
    postcard::from_bytes(&m.1).unwrap()
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
    let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
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
    let v: Reading = postcard::from_bytes(&value.unwrap()).unwrap();
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
    assert_eq!(entries[0], ("led".into(), 1, 0));
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
    let first: Response<Body> = postcard::from_bytes(&futures_lite_next(&mut routes).1).unwrap();
    let second: Response<Body> = postcard::from_bytes(&futures_lite_next(&mut routes).1).unwrap();
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
