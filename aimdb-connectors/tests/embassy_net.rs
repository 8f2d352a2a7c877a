//! `embassy_net::TcpConnect` against a second embassy-net stack, both in
//! this process: two Ethernet interfaces joined by an in-memory wire
//! (two queues of frames), no OS networking and no root. What the
//! connectors rely on: a refusal, an unanswered handshake and a missing
//! address each map to their `ConnectFailure`; and a second `connect` on
//! the same socket resets the first connection (the peer sees the reset)
//! and opens a working new one.
//!
//! Time comes from embassy-time's std driver (feature `tokio` turns it on
//! for this crate's tests); the stacks and the test run on one thread
//! under `futures::executor::block_on`.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::rc::Rc;
use std::task::{Context, Waker};
use std::time::Instant;

use aimdb_connectors::embassy_net::TcpConnect;
use aimdb_connectors::{Connect, ConnectFailure};
use embassy_futures::select::{select, Either};
use embassy_net::driver::{Capabilities, Driver, HardwareAddress, LinkState, RxToken, TxToken};
use embassy_net::tcp::{ConnectError, TcpSocket};
use embassy_net::{Config, Ipv4Address, Ipv4Cidr, Stack, StackResources, StaticConfigV4};
use embassy_time::{with_timeout, Duration};
use embedded_io_async::Write;

const MTU: usize = 1514;
const SERVER: Ipv4Address = Ipv4Address::new(10, 42, 0, 1);
const CLIENT: Ipv4Address = Ipv4Address::new(10, 42, 0, 2);
/// On the subnet, but no interface has it: its ARP requests go unanswered.
const NOBODY: Ipv4Address = Ipv4Address::new(10, 42, 0, 9);
const PORT: u16 = 7000;
/// Bound on every step of a test.
const STEP: Duration = Duration::from_secs(5);
/// Bound on a whole test (a step that waits on a peer can outlast `STEP`).
const WHOLE: Duration = Duration::from_secs(20);

fn config(addr: Option<Ipv4Address>) -> Config {
    match addr {
        Some(a) => Config::ipv4_static(StaticConfigV4 {
            address: Ipv4Cidr::new(a, 24),
            gateway: None,
            dns_servers: Default::default(),
        }),
        None => Config::default(),
    }
}

/// One direction of the wire: frames in flight, and the waker of the
/// stack that receives them.
#[derive(Default)]
struct Queue {
    frames: VecDeque<Vec<u8>>,
    waker: Option<Waker>,
}

/// One end of the wire, an Ethernet interface for embassy-net (every
/// future here runs on one thread: `Rc`, `RefCell`).
struct Port {
    inbox: Rc<RefCell<Queue>>,
    outbox: Rc<RefCell<Queue>>,
    mac: [u8; 6],
}

/// Two interfaces joined back to back.
fn wire() -> (Port, Port) {
    let (ab, ba) = (Rc::default(), Rc::default());
    (
        Port {
            inbox: Rc::clone(&ba),
            outbox: Rc::clone(&ab),
            mac: [0x02, 0, 0, 0, 0, 2],
        },
        Port {
            inbox: ab,
            outbox: ba,
            mac: [0x02, 0, 0, 0, 0, 1],
        },
    )
}

struct Rx(Vec<u8>);
struct Tx(Rc<RefCell<Queue>>);

impl Driver for Port {
    type RxToken<'a> = Rx;
    type TxToken<'a> = Tx;

    fn receive(&mut self, cx: &mut Context<'_>) -> Option<(Rx, Tx)> {
        let mut inbox = self.inbox.borrow_mut();
        match inbox.frames.pop_front() {
            Some(frame) => Some((Rx(frame), Tx(Rc::clone(&self.outbox)))),
            None => {
                inbox.waker = Some(cx.waker().clone());
                None
            }
        }
    }

    fn transmit(&mut self, _cx: &mut Context<'_>) -> Option<Tx> {
        Some(Tx(Rc::clone(&self.outbox)))
    }

    fn link_state(&mut self, _cx: &mut Context<'_>) -> LinkState {
        LinkState::Up
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::default();
        caps.max_transmission_unit = MTU;
        caps
    }

    fn hardware_address(&self) -> HardwareAddress {
        HardwareAddress::Ethernet(self.mac)
    }
}

impl RxToken for Rx {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(mut self, f: F) -> R {
        f(&mut self.0)
    }
}

impl TxToken for Tx {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut frame = vec![0; len];
        let r = f(&mut frame);
        let mut q = self.0.borrow_mut();
        q.frames.push_back(frame);
        if let Some(w) = q.waker.take() {
            w.wake();
        }
        r
    }
}

/// Runs `test` with a client stack (address `client`, `None`: none) and a
/// server stack at [`SERVER`] on one wire.
fn with_net(client: Option<Ipv4Address>, test: impl AsyncFnOnce(Stack<'_>, Stack<'_>)) {
    let (c_port, s_port) = wire();
    let mut resources = (StackResources::<2>::new(), StackResources::<2>::new());
    let (c_stack, mut c_net) = embassy_net::new(c_port, config(client), &mut resources.0, 1);
    let (s_stack, mut s_net) = embassy_net::new(s_port, config(Some(SERVER)), &mut resources.1, 2);
    futures::executor::block_on(async {
        let test = with_timeout(WHOLE, test(c_stack, s_stack));
        match select(test, join(c_net.run(), s_net.run())).await {
            Either::First(done) => done.expect("the test took too long"),
            Either::Second(_) => unreachable!("the stacks run for ever"),
        }
    });
}

#[test]
fn nothing_listening_is_refused() {
    with_net(Some(CLIENT), async |client, _server| {
        let (mut rx, mut tx) = ([0u8; 256], [0u8; 256]);
        let mut connect = TcpConnect::new(client, (SERVER, PORT), &mut rx, &mut tx)
            .timeout(Duration::from_secs(2));
        let e = with_timeout(STEP, connect.connect())
            .await
            .expect("bounded")
            .err()
            .expect("nothing listens");
        assert_eq!(e, ConnectError::ConnectionReset);
        assert_eq!(TcpConnect::failure(&e), ConnectFailure::Refused);
    });
}

#[test]
fn an_unanswered_handshake_times_out_and_can_be_retried() {
    with_net(Some(CLIENT), async |client, _server| {
        let (mut rx, mut tx) = ([0u8; 256], [0u8; 256]);
        let timeout = Duration::from_millis(300);
        let mut connect =
            TcpConnect::new(client, (NOBODY, PORT), &mut rx, &mut tx).timeout(timeout);
        // The second attempt starts with the first one's socket to reset,
        // whose reset cannot leave either (no ARP answer): bounded too.
        for attempt in 1..=2 {
            let started = Instant::now();
            let e = with_timeout(STEP, connect.connect())
                .await
                .expect("bounded")
                .err()
                .expect("nobody answers");
            let took = started.elapsed();
            assert_eq!(
                (e, TcpConnect::failure(&e)),
                (ConnectError::TimedOut, ConnectFailure::TimedOut),
                "attempt {attempt}"
            );
            assert!(
                took >= core::time::Duration::from_millis(300)
                    && took < core::time::Duration::from_millis(2_000),
                "attempt {attempt} took {took:?}"
            );
        }
    });
}

#[test]
fn no_address_is_unreachable() {
    with_net(None, async |client, _server| {
        let (mut rx, mut tx) = ([0u8; 256], [0u8; 256]);
        let mut connect = TcpConnect::new(client, (SERVER, PORT), &mut rx, &mut tx);
        let e = with_timeout(STEP, connect.connect())
            .await
            .expect("bounded")
            .err()
            .expect("the client stack has no address");
        assert_eq!(e, ConnectError::NoRoute);
        assert_eq!(TcpConnect::failure(&e), ConnectFailure::Unreachable);
    });
}

#[test]
fn connecting_again_resets_the_old_connection_and_opens_a_new_one() {
    with_net(Some(CLIENT), async |client, server| {
        let (mut rx, mut tx) = ([0u8; 256], [0u8; 256]);
        let mut connect = TcpConnect::new(client, (SERVER, PORT), &mut rx, &mut tx)
            .timeout(Duration::from_secs(2))
            .keep_alive(Duration::from_millis(500));
        // Two server sockets take turns: the next one listens before the
        // client connects again, the current one sees the reset.
        let mut b = [[0u8; 256]; 4];
        let [b0, b1, b2, b3] = &mut b;
        let mut peers = [
            TcpSocket::new(server, b0, b1),
            TcpSocket::new(server, b2, b3),
        ];
        let mut buf = [0u8; 16];

        let (accepted, halves) = join(peers[0].accept(PORT), connect.connect()).await;
        accepted.expect("accept");
        let mut halves = halves.expect("connect");
        for (round, msg) in [&b"one"[..], b"two", b"three"].into_iter().enumerate() {
            let [p0, p1] = &mut peers;
            let (cur, next) = if round % 2 == 0 { (p0, p1) } else { (p1, p0) };
            // Both halves work.
            let (c_rx, c_tx) = &mut halves;
            c_tx.write_all(msg).await.expect("client write");
            c_tx.flush().await.expect("client flush");
            let n = with_timeout(STEP, cur.read(&mut buf))
                .await
                .expect("bounded")
                .expect("server read");
            assert_eq!(&buf[..n], msg, "round {round}");
            cur.write_all(b"ack").await.expect("server write");
            let n = with_timeout(STEP, c_rx.read(&mut buf))
                .await
                .expect("bounded")
                .expect("client read");
            assert_eq!(&buf[..n], b"ack", "round {round}");

            // The connector is done with these halves and connects again.
            let (accepted, again, seen) = join3(
                next.accept(PORT),
                connect.connect(),
                with_timeout(STEP, cur.read(&mut buf)),
            )
            .await;
            assert_eq!(
                seen.expect("bounded"),
                Err(embassy_net::tcp::Error::ConnectionReset),
                "round {round}: the old connection was reset"
            );
            cur.abort();
            accepted.expect("accept");
            halves = again.expect("connect again");
        }
    });
}

fn join<A: Future, B: Future>(a: A, b: B) -> embassy_futures::join::Join<A, B> {
    embassy_futures::join::join(a, b)
}

fn join3<A: Future, B: Future, C: Future>(
    a: A,
    b: B,
    c: C,
) -> embassy_futures::join::Join3<A, B, C> {
    embassy_futures::join::join3(a, b, c)
}
