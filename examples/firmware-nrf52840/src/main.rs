//! The demo device on a real board: an nRF52840 (the nRF52840-DK), the same
//! application as the QEMU firmware (`device-app`: readings, status,
//! commands, and their connector) over embassy-nrf's `BufferedUarte` on
//! UARTE0 — P0.06 TXD and P0.08 RXD, the DK's USB virtual COM port — at
//! 115,200 baud, 8N1. Time comes from embassy-nrf's RTC1 driver.
//!
//! Without features the UART speaks the framed protocol (to the gateway);
//! with `--features mqtt` it speaks MQTT itself, for a serial-to-TCP
//! bridge in front of a broker. A board with a network stack would open
//! an embassy-net `TcpSocket` in `Connect` instead. See the README section
//! "Running on hardware".
#![no_std]
#![no_main]

use embassy_executor::Spawner;
use embassy_nrf::buffered_uarte::{self, BufferedUarte};
use embassy_nrf::{bind_interrupts, peripherals, uarte};
use embassy_time::Timer;
use panic_halt as _;

bind_interrupts!(struct Irqs {
    UARTE0 => buffered_uarte::InterruptHandler<peripherals::UARTE0>;
});

#[embassy_executor::main]
async fn main(spawner: Spawner) {
    let p = embassy_nrf::init(Default::default());
    let mut config = uarte::Config::default();
    config.parity = uarte::Parity::Excluded;
    config.baudrate = uarte::Baudrate::Baud115200;
    // The UART's DMA buffers live in this task's state (static RAM).
    let (mut rx_buf, mut tx_buf) = ([0u8; 256], [0u8; 256]);
    let uart = BufferedUarte::new(
        p.UARTE0,
        p.TIMER0,
        p.PPI_CH0,
        p.PPI_CH1,
        p.PPI_GROUP0,
        p.P0_08,
        p.P0_06,
        Irqs,
        config,
        &mut rx_buf,
        &mut tx_buf,
    );
    let (rx, tx) = uart.split();

    if let Ok(t) = device_app::control_task() {
        spawner.spawn(t);
    }
    if let Ok(t) = device_app::sensor_task() {
        spawner.spawn(t);
    }
    run(spawner, rx, tx).await;
    // The connector gave up (MQTT with reconnecting disabled): idle.
    loop {
        Timer::after_secs(60).await;
    }
}

/// The framed connector, started over on the rare end of a link (a UART
/// never closes).
#[cfg(not(feature = "mqtt"))]
async fn run(
    _spawner: Spawner,
    mut rx: buffered_uarte::BufferedUarteRx<'_>,
    mut tx: buffered_uarte::BufferedUarteTx<'_>,
) {
    loop {
        let _ = device_app::connector(&mut rx, &mut tx, device_app::framed_config()).await;
    }
}

/// The MQTT connector over the UART, and its counters record.
#[cfg(feature = "mqtt")]
async fn run(
    spawner: Spawner,
    rx: buffered_uarte::BufferedUarteRx<'_>,
    tx: buffered_uarte::BufferedUarteTx<'_>,
) {
    if let Ok(t) = device_app::link_stats_task() {
        spawner.spawn(t);
    }
    let (mut rx_buf, mut tx_buf) = ([0u8; device_app::MQTT_RX], [0u8; device_app::MQTT_TX]);
    let _ = device_app::mqtt_connector(
        (rx, tx),
        &mut rx_buf,
        &mut tx_buf,
    )
    .await;
}
