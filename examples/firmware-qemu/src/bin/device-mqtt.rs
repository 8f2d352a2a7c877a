//! The demo device speaking MQTT itself: the same records and tasks as
//! `device`, but through `aimdb_connectors::mqtt::Mqtt::run` (the code a
//! host runs) straight to a broker. Under QEMU, UART0 *is* the TCP stream
//! to the broker: run with `-serial tcp:127.0.0.1:PORT,reconnect=1` and
//! QEMU connects the UART to the broker's port, reconnecting after the
//! broker restarts (`make e2e` runs it so, see the gateway crate's
//! `mqtt-device-e2e`). On a board
//! with a network stack, `Connect` opens an embassy-net `TcpSocket`
//! instead of handing out the UART.
#![no_std]
#![no_main]

use cortex_m_semihosting::hprintln;
use embassy_executor::Spawner;
use firmware_qemu::{time, uart};

#[embassy_executor::main]
async fn main(spawner: Spawner) {
    let Some(p) = cortex_m::Peripherals::take() else {
        fail("peripherals taken")
    };
    time::init(p.SYST);
    let Some((rx, tx)) = uart::take() else {
        fail("UART0 taken")
    };
    hprintln!("device-mqtt: up, MQTT connector on UART0");
    spawner.spawn(device_app::control_task().unwrap_or_else(|_| fail("control task")));
    spawner.spawn(device_app::sensor_task().unwrap_or_else(|_| fail("sensor task")));
    spawner.spawn(device_app::link_stats_task().unwrap_or_else(|_| fail("link task")));
    // The session buffers live in this task's state: static RAM (the
    // executor's task pool), counted in the footprint.
    let (mut rx_buf, mut tx_buf) = ([0u8; device_app::MQTT_RX], [0u8; device_app::MQTT_TX]);
    let connect = (rx, tx);
    let why = device_app::mqtt_connector(connect, &mut rx_buf, &mut tx_buf).await;
    hprintln!("device-mqtt: connector stopped: {}", why);
    fail("connector stopped")
}

firmware_qemu::handlers!("device-mqtt");
