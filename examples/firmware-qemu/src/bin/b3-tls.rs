//! b3_on_target's TLS row: `mqtt_publish` over TLS 1.3, in a binary of
//! its own. The TLS handshake needs most of the board's 64 KiB of RAM as
//! stack (about 31 KiB, measured), and a second instantiation of the
//! connector in `b3` would change how the compiler inlines the first, so
//! `b3`'s MQTT rows would count another binary's code. Same counter,
//! calibration and output as `b3` (`firmware_qemu::measure`).
#![no_std]
#![no_main]

use core::future::poll_fn;
use core::hint::black_box;
use core::pin::pin;
use core::task::{Poll, Waker};

use aimdb_connectors::loopback::Pair;
use aimdb_connectors::mqtt::{self, Counters, Mqtt, QoS};
use aimdb_connectors::tls::TlsConnect;
use aimdb_core::codec::Postcard;
use aimdb_core::inbound::Dispatch;
use aimdb_core::outbound::{self, Routes};
use aimdb_core::record::{Latest, Record};
use aimdb_core::sync::Readiness;
use cortex_m_rt::entry;
use cortex_m_semihosting::hprintln;
use embassy_executor::Executor;
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex as Cs;
use embedded_io_async::{Read, Write};
use firmware_qemu::measure::{calibrate, ready, row, step, value};
use firmware_qemu::tls_peer::{Peer, CERT};
use rand_core::SeedableRng;

type Rec = Record<Cs, Latest<u32>, 1>;

/// The connector on one end of an in-memory stream, `tls_peer` on the
/// other.
static TLS_PAIR: Pair<Cs, 1024> = Pair::new();
static TLS_OUT: Rec = Record::new("b3/tls/out");
static TLS_READY: Readiness<1> = Readiness::new();
static TLS_COUNTERS: Counters = Counters::new();

#[entry]
fn main() -> ! {
    let Some(p) = cortex_m::Peripherals::take() else {
        fail("peripherals taken")
    };
    firmware_qemu::measure::start(p.SYST);
    calibrate();
    // The connector's timers (embassy-time's queue is the executor's)
    // need a task's waker.
    let Some(executor) = cortex_m::singleton!(: Executor = Executor::new()) else {
        fail("executor")
    };
    executor.run(|spawner| match tls_task() {
        Ok(t) => spawner.spawn(t),
        Err(_) => fail("tls task"),
    })
}

#[embassy_executor::task]
async fn tls_task() {
    let waker = poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
    mqtt_tls_rows(&waker);
    hprintln!("B3END");
    firmware_qemu::exit(cortex_m_semihosting::debug::EXIT_SUCCESS)
}

/// `mqtt_publish` over TLS 1.3: the same connector and route under
/// `tls::TlsConnect` (embedded-tls, `TLS_AES_128_GCM_SHA256`), its peer
/// `firmware_qemu::tls_peer` doing the handshake (uncounted) and
/// answering the CONNECT; each operation then encrypts one record, which
/// the peer takes off the pipe unopened, as `mqtt_publish` takes the
/// plain packet. The difference of the two rows is what TLS adds per
/// published message.
fn mqtt_tls_rows(waker: &Waker) {
    let (client_rx, client_tx) = TLS_PAIR.a();
    let (mut broker_rx, mut broker_tx) = TLS_PAIR.b();
    let Ok(mut inbound) = Dispatch::<1, 4>::builder().build() else {
        fail("tls inbound table")
    };
    let Ok(r) = TLS_OUT.subscribe() else {
        fail("tls out reader")
    };
    let mut out = outbound::Link::new(r, "b3/out", Postcard).qos(QoS::AtMostOnce);
    let mut scratch = [0x5au8; 32];
    let mut b = Routes::<_, 1, 1>::builder(&TLS_READY, &mut scratch);
    b.link(&mut out);
    let Ok(mut outbound) = b.build() else {
        fail("tls outbound table")
    };
    let mut c = mqtt::Config::new("b3");
    c.keep_alive = None;
    c.ack_timeout = None;
    let (mut rx, mut tx) = ([0u8; 256], [0u8; 512]);
    let (mut tls_rx, mut tls_tx) = ([0u8; 2 * 1536], [0u8; 2 * 512]);
    // Fixed seeds: the same handshake on every run.
    let client_rng = rand_chacha::ChaCha20Rng::from_seed([7; 32]);
    let mut peer_rng = rand_chacha::ChaCha20Rng::from_seed([9; 32]);
    let connect = TlsConnect::new(
        (client_rx, client_tx),
        "localhost",
        CERT,
        client_rng,
        &mut tls_rx,
        &mut tls_tx,
    );
    let parts = mqtt::Parts {
        connect,
        clock: aimdb_connectors::clock::EmbassyClock,
        rx: &mut rx,
        tx: &mut tx,
        counters: &TLS_COUNTERS,
    };
    let Ok(mut m) = Mqtt::new(c, parts) else {
        fail("tls mqtt config")
    };
    let mut run = pin!(m.run(&mut inbound, &mut outbound));

    // The handshake and the CONNECT, peer side.
    let mut peer = Peer::new();
    let (mut inb, mut have, mut reply) = ([0u8; 1024], 0usize, [0u8; 1024]);
    for _ in 0..32 {
        step(run.as_mut(), waker);
        while !TLS_PAIR.a_to_b().is_empty() {
            let Ok(n) = ready(broker_rx.read(&mut inb[have..])) else {
                fail("tls peer read")
            };
            have += n;
        }
        while have >= 5 {
            let len = 5 + usize::from(u16::from_be_bytes([inb[3], inb[4]]));
            if have < len {
                break;
            }
            let answer = match peer.take(&mut inb[..len], &mut peer_rng, &mut reply) {
                Ok(n) => n,
                // MQTT 5 CONNACK (no session, success) to the CONNECT.
                Err(n) if n > 0 && inb[5] & 0xf0 == 0x10 => {
                    peer.seal(&[0x20, 0x03, 0x00, 0x00, 0x00], &mut reply)
                }
                Err(_) => fail("unexpected record from the device"),
            };
            if answer > 0 && ready(broker_tx.write(&reply[..answer])) != Ok(answer) {
                fail("tls peer write");
            }
            inb.copy_within(len..have, 0);
            have -= len;
        }
        if TLS_COUNTERS.is_connected() {
            break;
        }
    }
    if !TLS_COUNTERS.is_connected() {
        fail("mqtt over tls handshake");
    }

    row("mqtt_publish_tls", |i| {
        TLS_OUT.write(value(i));
        step(run.as_mut(), waker);
        let Ok(n) = ready(broker_rx.read(&mut inb)) else {
            fail("tls peer read")
        };
        black_box(&inb[..n]);
    });
}

firmware_qemu::handlers!("b3-tls");
