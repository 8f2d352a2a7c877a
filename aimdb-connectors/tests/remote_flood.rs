//! A flood of remote-access requests does not starve a node's data
//! routes: over the framed loopback pair, a client sends requests as fast
//! as its connector takes them while the node streams values on a data
//! route; every value arrives, in order. The node holds one request at a
//! time: those that arrive meanwhile are counted and the latest of them is
//! answered `Busy`.

mod common;

use std::cell::Cell;

use aimdb_connectors::framed::{Counters, Framed};
use aimdb_connectors::loopback::Pair;
use aimdb_core::codec::{self, Postcard};
use aimdb_core::inbound;
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound;
use aimdb_core::outbound::Routes;
use aimdb_core::record::{Record, Ring};
use aimdb_core::remote::proto::{self, Body, Host, Response};
use aimdb_core::remote::{Description, Op, Request, RequestError, Responder};
use aimdb_core::sync::Readiness;
use common::block_on;
use embassy_futures::join::join;
use embassy_futures::select::{select, Either};
use embassy_sync::blocking_mutex::raw::{CriticalSectionRawMutex as Cs, NoopRawMutex};

type Raw = heapless::Vec<u8, 256>;

/// Values the node streams.
const VALUES: u32 = 2_000;
/// Requests the client sends (bounded: the loop ends when the values are
/// all in, or after this many).
const REQUESTS: u32 = 20_000;

static DATA: Record<Cs, Ring<u32, 16>, 1> = Record::new("data");
static GOT: Record<Cs, Ring<u32, 16>, 1> = Record::new("got");
static REQS: Record<Cs, Ring<Raw, 4>, 1> = Record::new("reqs");
static ANSWERS: Record<Cs, Ring<Raw, 64>, 1> = Record::new("answers");
static TABLE: [Description; 1] = [Description::of(&DATA).topics(&["dev/data"])];
static RESPONDER: Responder<Cs, 64> = Responder::new(&TABLE);
static NODE_READY: Readiness<1> = Readiness::new();
static CLIENT_READY: Readiness<1> = Readiness::new();

#[test]
fn a_request_flood_leaves_the_data_route_delivering_in_order() {
    // The node: data out, requests in, answers out.
    let mut data = outbound::Link::new(DATA.subscribe().unwrap(), "dev/data", Postcard);
    let mut answers =
        outbound::Link::new(RESPONDER.requests(), proto::RESPONSE, RESPONDER.answers());
    let mut payload = [0u8; 256];
    let mut b = Routes::<_, 1, 2>::builder(&NODE_READY, &mut payload);
    b.link(&mut data).link(&mut answers);
    let mut node_out = b.build().unwrap();
    let mut b = Dispatch::<2, 4>::builder();
    b.link(proto::REQUEST, &RESPONDER);
    let mut node_in = b.build().unwrap();

    // The client: requests out; data and answers in.
    let mut reqs = outbound::Link::new(REQS.subscribe().unwrap(), proto::REQUEST, codec::Raw);
    let mut payload = [0u8; 256];
    let mut b = Routes::<_, 1, 1>::builder(&CLIENT_READY, &mut payload);
    b.link(&mut reqs);
    let mut client_out = b.build().unwrap();
    let got = inbound::Link::new(&GOT, Postcard);
    let answers_in = inbound::Link::new(&ANSWERS, codec::Raw).with_max_payload(256);
    let mut b = Dispatch::<2, 4>::builder();
    b.link("dev/data", &got).link(proto::RESPONSE, &answers_in);
    let mut client_in = b.build().unwrap();

    let pair = Pair::<NoopRawMutex, 1024>::new();
    let ((n_rx, n_tx), (c_rx, c_tx)) = (pair.a(), pair.b());
    let (n_stats, c_stats) = (Counters::new(), Counters::new());
    let mut node = Framed::new(&n_stats);
    let mut client = Framed::new(&c_stats);
    let mut got_reader = GOT.subscribe().unwrap();
    let mut answer_reader = ANSWERS.subscribe().unwrap();
    let received = Cell::new(0u32);
    let done = Cell::new(false);
    let (mut busy, mut answered) = (0u32, 0u32);

    block_on(async {
        let work = async {
            // The node's producer: a value whenever the client is less than
            // 8 behind, so only a starved data route could make it wait
            // for ever (the test then times out).
            let produce = async {
                for v in 0..VALUES {
                    while v >= received.get() + 8 {
                        tokio::task::yield_now().await;
                    }
                    DATA.write(v);
                    tokio::task::yield_now().await;
                }
            };
            // The client's consumer: every value, in order.
            let consume = async {
                for want in 0..VALUES {
                    assert_eq!(got_reader.recv().await, Ok(want), "data out of order");
                    received.set(want + 1);
                }
                done.set(true);
            };
            // The flood: a request whenever the client's connector has
            // taken the last one, until the values are all in.
            let flood = async {
                let mut buf = [0u8; 64];
                for id in 0..REQUESTS {
                    if done.get() {
                        break;
                    }
                    let op = Op::List { from: 0 };
                    let bytes = postcard::to_slice(&Request { id, op }, &mut buf).unwrap();
                    REQS.write(Raw::from_slice(bytes).unwrap());
                    // Several per turn: the client's route batches them into
                    // one write, so they reach the node back to back.
                    if id % 4 == 3 {
                        tokio::task::yield_now().await;
                    }
                }
            };
            // Answers: counted by kind.
            let answers = async {
                loop {
                    let Ok(a) = answer_reader.recv().await else {
                        continue;
                    };
                    let r: Response<Body<'_, Host>> = postcard::from_bytes(&a).unwrap();
                    match r.result {
                        Ok(Body::List { .. }) => answered += 1,
                        Err(RequestError::Busy) => busy += 1,
                        other => panic!("unexpected answer {other:?}"),
                    }
                }
            };
            match select(join(join(produce, consume), flood), answers).await {
                Either::First(_) => {}
                Either::Second(()) => unreachable!(),
            }
        };
        let connectors = join(
            node.run(n_rx, n_tx, &mut node_in, &mut node_out),
            client.run(c_rx, c_tx, &mut client_in, &mut client_out),
        );
        match select(work, connectors).await {
            Either::First(()) => {}
            Either::Second(_) => panic!("a connector stopped"),
        }
    });
    assert_eq!(received.get(), VALUES);
    let stats = RESPONDER.stats();
    eprintln!(
        "{VALUES} values in order beside {} requests: {answered} answered, {busy} busy",
        stats.requests + stats.busy
    );
    assert!(stats.requests > 0, "the flood reached the node");
    assert!(stats.busy > 0, "requests arrived faster than answered");
    // One answer per request taken. When the work ends, the last two may
    // still be on their way: one being written, one encoded behind it
    // (the connector takes messages while a write is in progress).
    assert!(answered <= stats.requests && stats.requests <= answered + 2);
    assert_eq!(n_stats.snapshot().errors_in(), 0);
}
