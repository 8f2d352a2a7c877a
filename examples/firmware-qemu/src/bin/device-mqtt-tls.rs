//! The MQTT device of `device-mqtt` over TLS 1.3: UART0 is the TCP stream
//! to the broker's TLS listener (`-serial tcp:127.0.0.1:PORT,reconnect=1`),
//! and `aimdb_connectors::tls::TlsConnect` runs the handshake and the
//! record layer over it, checking the broker's certificate for
//! `localhost` against the CA in `aimdb-broker-ca.der` (DER, in QEMU's
//! working directory). The gateway crate's `mqtt-device-e2e --tls` runs it
//! against a mosquitto whose certificates it makes for the run.
//!
//! Test firmware: what a board has in hardware comes from the host by
//! semihosting here (the CA from a file, the generator's seed from
//! `/dev/urandom`, the date from the host's clock for the validity
//! check). Static RAM holds the TLS buffers: records of up to 4 KiB from
//! the broker (max fragment length), 1 KiB to it.
#![no_std]
#![no_main]

use aimdb_connectors::tls::{self, MaxFragmentLength, TlsConnect, WallClock};
use cortex_m_semihosting::hprintln;
use embassy_executor::Spawner;
use firmware_qemu::{host, time, uart};
use rand_core::SeedableRng;

const SERVER_NAME: &str = "localhost";
static TLS: tls::Counters = tls::Counters::new();

#[embassy_executor::main]
async fn main(spawner: Spawner) {
    let Some(p) = cortex_m::Peripherals::take() else {
        fail("peripherals taken")
    };
    time::init(p.SYST);
    let Some((rx, tx)) = uart::take() else {
        fail("UART0 taken")
    };
    let mut ca = [0u8; 1024];
    let Some(ca_len) = host::read(c"aimdb-broker-ca.der", &mut ca) else {
        fail("no aimdb-broker-ca.der in QEMU's working directory")
    };
    let mut seed = [0u8; 32];
    if host::read(c"/dev/urandom", &mut seed) != Some(seed.len()) {
        fail("no seed from /dev/urandom")
    }
    WallClock::set(host::unix_time());
    hprintln!(
        "device-mqtt-tls: up, MQTT over TLS 1.3 on UART0, CA {} B",
        ca_len
    );
    spawner.spawn(device_app::control_task().unwrap_or_else(|_| fail("control task")));
    spawner.spawn(device_app::sensor_task().unwrap_or_else(|_| fail("sensor task")));
    spawner.spawn(device_app::link_stats_task().unwrap_or_else(|_| fail("link task")));

    let (mut rx_buf, mut tx_buf) = ([0u8; device_app::MQTT_RX], [0u8; device_app::MQTT_TX]);
    let (mut tls_rx, mut tls_tx) = ([0u8; 2 * (4096 + 256 + 5)], [0u8; 2 * 1280]);
    let rng = rand_chacha::ChaCha20Rng::from_seed(seed);
    let connect = TlsConnect::new(
        (rx, tx),
        SERVER_NAME,
        &ca[..ca_len],
        rng,
        &mut tls_rx,
        &mut tls_tx,
    )
    .max_fragment_length(MaxFragmentLength::Bits12)
    .clock::<WallClock>()
    .counters(&TLS);
    let why = device_app::mqtt_connector(connect, &mut rx_buf, &mut tx_buf).await;
    let t = TLS.snapshot();
    hprintln!(
        "device-mqtt-tls: connector stopped: {} ({} handshakes, {} certificates refused)",
        why,
        t.handshakes,
        t.certificate_refused
    );
    fail("connector stopped")
}

firmware_qemu::handlers!("device-mqtt-tls");
