//! `Framed::run_reconnecting`: the reconnect loop with backoff, policy and
//! state replay, over scripted in-memory connections (no timing: the
//! delays it asks for are recorded, not slept) and over real TCP.

mod common;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::time::Duration;

use aimdb_connectors::clock::{Clock, Instant};
use aimdb_connectors::framed::{self, frame, Counters, Framed};
use aimdb_connectors::loopback::{Pair, PipeReader, PipeWriter};
use aimdb_connectors::reconnect::{Backoff, Reconnect, Stopped};
use aimdb_connectors::tokio_io::{TcpConnect, TokioClock};
use aimdb_core::codec::Postcard;
use aimdb_core::inbound::{Dispatch, LocalDispatch};
use aimdb_core::outbound;
use aimdb_core::outbound::LocalRoutes;
use aimdb_core::record::{Latest, Record, Ring};
use aimdb_core::sync::{HostRawMutex, Readiness};
use common::{block_on, leak};
use embassy_futures::join::join;
use embassy_sync::blocking_mutex::raw::NoopRawMutex;
use embedded_io_async::Read;

type P = Pair<NoopRawMutex, 512>;

/// One scripted attempt: refused, or a connection over a pair whose end
/// `b` the test plays.
enum Attempt {
    Refused,
    Open(&'static P),
}

struct Script(VecDeque<Attempt>);

impl aimdb_connectors::Connect for Script {
    type Connection<'c> = (
        PipeReader<'static, NoopRawMutex, 512>,
        PipeWriter<'static, NoopRawMutex, 512>,
    );
    type Error = &'static str;
    async fn connect(&mut self) -> Result<Self::Connection<'_>, Self::Error> {
        match self.0.pop_front() {
            Some(Attempt::Open(p)) => Ok(p.a()),
            Some(Attempt::Refused) | None => Err("refused"),
        }
    }
}

/// A clock that records every wait asked for (in milliseconds) and
/// jumps to its end at once.
#[derive(Default)]
struct Waits(RefCell<Vec<u32>>, Cell<u64>);

impl Clock for Waits {
    fn now(&self) -> Instant {
        Instant::from_micros(self.1.get())
    }
    async fn sleep_until(&self, at: Instant) {
        if at == Instant::MAX {
            return std::future::pending().await;
        }
        let wait = at.saturating_duration_since(self.now());
        self.0.borrow_mut().push(wait.as_millis() as u32);
        self.1.set(at.as_micros());
    }
}

/// The test's end of a connection: whole frames, in order.
struct Peer<R: Read> {
    rx: R,
    dec: frame::Decoder<64>,
    held: Vec<u8>,
}

impl<R: Read> Peer<R> {
    fn new(rx: R) -> Self {
        Self {
            rx,
            dec: frame::Decoder::new(),
            held: Vec::new(),
        }
    }

    /// The next frame as (topic, payload).
    async fn frame(&mut self) -> (String, Vec<u8>) {
        loop {
            if !self.held.is_empty() {
                let (got, used) = match self.dec.push(&self.held) {
                    frame::Event::Frame(f, n) => (
                        Some((
                            String::from_utf8(f.topic.to_vec()).unwrap(),
                            f.payload.to_vec(),
                        )),
                        n,
                    ),
                    frame::Event::Error(e, n) => panic!("bad frame {e:?} ({n} bytes)"),
                    frame::Event::NeedMore => (None, self.held.len()),
                };
                self.held.drain(..used);
                if let Some(f) = got {
                    return f;
                }
            }
            let mut buf = [0u8; 64];
            let n = self.rx.read(&mut buf).await.unwrap();
            assert!(n > 0, "connector closed the stream");
            self.held.extend_from_slice(&buf[..n]);
        }
    }
}

#[test]
fn reconnects_with_backoff_replays_state_and_gives_up_by_policy() {
    let state_rec: &'static Record<NoopRawMutex, Latest<u8>, 1> = leak(Record::new("state"));
    let n_rec: &'static Record<NoopRawMutex, Ring<u32, 16>, 1> = leak(Record::new("n"));
    let ready: &'static Readiness<1> = leak(Readiness::new());
    let (first, second): (&'static P, &'static P) = (leak(P::new()), leak(P::new()));
    let script = Script(VecDeque::from([
        Attempt::Refused,
        Attempt::Open(first),
        Attempt::Refused,
        Attempt::Refused,
        Attempt::Open(second),
    ]));
    let mut state = outbound::Link::new(state_rec.subscribe().unwrap(), "state", Postcard);
    let mut n = outbound::Link::new(n_rec.subscribe().unwrap(), "n", Postcard);
    let mut payload = [0u8; 16];
    let mut b = LocalRoutes::<_, 1, 2>::builder(ready, &mut payload);
    b.link(&mut state).link(&mut n);
    let mut routes = b.build().unwrap();
    let mut dispatch = LocalDispatch::<1, 1>::builder().build().unwrap();
    let counters = Counters::new();
    let mut config = framed::Config::new();
    config.reconnect = Reconnect::Attempts(3);
    config.backoff = Backoff {
        min: Duration::from_millis(10),
        max: Duration::from_millis(1_000),
    };
    let mut framed = Framed::<64, 128>::with_sizes(&counters).with_config(config);
    let waits = Waits::default();

    state_rec.write(7);
    n_rec.write(1);
    let stopped = block_on(async {
        let run = framed.run_reconnecting(script, &waits, &mut dispatch, &mut routes);
        let peer = async {
            let mut p = Peer::new(first.b().0);
            let mut got = [p.frame().await, p.frame().await];
            got.sort();
            assert_eq!(
                got,
                [("n".into(), vec![1]), ("state".into(), vec![7])],
                "first connection"
            );
            first.close();
            // Second connection: the state again although nobody wrote it,
            // then what is written now.
            let mut p = Peer::new(second.b().0);
            assert_eq!(p.frame().await, ("state".into(), vec![7]), "replayed");
            n_rec.write(2);
            assert_eq!(p.frame().await, ("n".into(), vec![2]));
            second.close();
        };
        let (stopped, ()) = join(run, peer).await;
        stopped
    });

    // Three refusals in a row after the second connection dropped.
    assert_eq!(stopped, Stopped::ConnectFailed(3));
    // After a refusal `delay_ms(failures + 1)`, after a drop `delay_ms(1)`;
    // no wait after the refusal that ends the run.
    assert_eq!(*waits.0.borrow(), [20, 10, 20, 40, 10, 20, 40]);
    let s = counters.snapshot();
    assert_eq!((s.connect_failures, s.reconnects), (6, 1), "{s:?}");
    assert_eq!(s.sent, 4, "{s:?}");
}

#[test]
fn never_stops_after_the_first_drop_and_a_pair_of_halves_is_a_connect() {
    let state_rec: &'static Record<NoopRawMutex, Latest<u8>, 1> = leak(Record::new("state"));
    let ready: &'static Readiness<1> = leak(Readiness::new());
    let pair: &'static P = leak(P::new());
    let mut state = outbound::Link::new(state_rec.subscribe().unwrap(), "state", Postcard);
    let mut payload = [0u8; 16];
    let mut b = LocalRoutes::<_, 1, 1>::builder(ready, &mut payload);
    b.link(&mut state);
    let mut routes = b.build().unwrap();
    let mut dispatch = LocalDispatch::<1, 1>::builder().build().unwrap();
    let counters = Counters::new();
    let mut config = framed::Config::new();
    config.reconnect = Reconnect::Never;
    let mut framed = Framed::<64, 128>::with_sizes(&counters).with_config(config);
    let waits = Waits::default();
    // An always-open link (a UART): the halves themselves.
    let halves = pair.a();

    state_rec.write(3);
    let stopped = block_on(async {
        let run = framed.run_reconnecting(halves, &waits, &mut dispatch, &mut routes);
        let peer = async {
            let mut p = Peer::new(pair.b().0);
            assert_eq!(p.frame().await, ("state".into(), vec![3]));
            pair.close();
        };
        join(run, peer).await.0
    });
    assert_eq!(stopped, Stopped::Disconnected);
    assert!(waits.0.borrow().is_empty(), "no wait: nothing follows");
    let s = counters.snapshot();
    assert_eq!(
        (s.connect_failures, s.reconnects, s.sent),
        (0, 0, 1),
        "{s:?}"
    );
}

/// Over real TCP on loopback, the connector `tokio::spawn`ed on the
/// multi-thread runtime: the listener closes each connection after a few
/// values; the connector reconnects (tokio's timer), every connection
/// starts with the replayed state, and the stream values arrive in order
/// with none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tcp_every_connection_gets_the_state_and_values_stay_in_order() {
    static STATE: Record<HostRawMutex, Latest<u8>, 1> = Record::new("state");
    static N: Record<HostRawMutex, Ring<u32, 64>, 1> = Record::new("n");
    static READY: Readiness<1> = Readiness::new();
    static COUNTERS: Counters = Counters::new();
    const CONNECTIONS: usize = 3;
    const PER_CONNECTION: u32 = 5;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let connect = TcpConnect::new(listener.local_addr().unwrap());
    STATE.write(9);
    let state = leak_mut(outbound::Link::new(
        STATE.subscribe().unwrap(),
        "state",
        Postcard,
    ));
    let n = leak_mut(outbound::Link::new(N.subscribe().unwrap(), "n", Postcard));
    let mut b = outbound::Routes::<_, 1, 2>::builder(&READY, leak_mut([0u8; 16]));
    b.link(state).link(n);
    let mut routes = b.build().unwrap();
    let mut dispatch = Dispatch::<1, 1>::builder().build().unwrap();
    let mut config = framed::Config::new();
    config.backoff = Backoff {
        min: Duration::from_millis(1),
        max: Duration::from_millis(10),
    };
    let connector = tokio::spawn(async move {
        Framed::new(&COUNTERS)
            .with_config(config)
            .run_reconnecting(connect, TokioClock::new(), &mut dispatch, &mut routes)
            .await
    });

    let server = async {
        let mut seen = Vec::new();
        let mut next = 0u32;
        for c in 0..CONNECTIONS {
            let (s, _) = listener.accept().await.unwrap();
            let (rx, _tx) = aimdb_connectors::tokio_io::tcp(s);
            let mut p = Peer::new(rx);
            assert_eq!(p.frame().await, ("state".into(), vec![9]), "connection {c}");
            for _ in 0..PER_CONNECTION {
                N.write(next);
                next += 1;
                let (t, v) = p.frame().await;
                assert_eq!(t, "n");
                seen.push(postcard::from_bytes::<u32>(&v).unwrap());
            }
            // Dropping both halves closes the connection.
        }
        seen
    };
    let got = tokio::time::timeout(common::LIMIT, server)
        .await
        .expect("test timed out");
    connector.abort();
    let want: Vec<u32> = (0..CONNECTIONS as u32 * PER_CONNECTION).collect();
    assert_eq!(got, want, "in order, each once");
    let s = COUNTERS.snapshot();
    assert_eq!(s.reconnects as usize, CONNECTIONS - 1, "{s:?}");
}

fn leak_mut<T>(v: T) -> &'static mut T {
    Box::leak(Box::new(v))
}
