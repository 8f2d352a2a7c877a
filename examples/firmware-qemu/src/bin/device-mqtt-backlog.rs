//! `device-mqtt` with its readings durable: each reading is stored in
//! flash as it is written and removed once the broker acknowledged it,
//! so a broker outage, or a reset in the middle of one, loses none.
//!
//! QEMU emulates no flash writes, so the flash is a host file
//! ([`flash::demo_backlog`]). On a board the same code takes the chip's
//! flash driver and a range the linker script leaves free.
#![no_std]
#![no_main]

use aimdb_connectors::backlog;
use cortex_m_semihosting::hprintln;
use embassy_executor::Spawner;
use firmware_qemu::{flash, time, uart};

#[embassy_executor::main]
async fn main(spawner: Spawner) {
    let Some(p) = cortex_m::Peripherals::take() else {
        fail("peripherals taken")
    };
    time::init(p.SYST);
    let Some((rx, tx)) = uart::take() else {
        fail("UART0 taken")
    };
    let Some((mut flash, backlog, boots)) = flash::demo_backlog() else {
        fail("no backlog.bin of 66 KiB in QEMU's directory")
    };
    let counters = &device_app::BACKLOG;
    let Ok(boot) =
        backlog::next_boot(&mut flash, boots, device_app::backlog_cache(), counters).await
    else {
        fail("boot counter")
    };
    hprintln!(
        "device-mqtt-backlog: up, boot {}, MQTT connector on UART0",
        boot
    );
    spawner.spawn(device_app::control_task().unwrap_or_else(|_| fail("control task")));
    spawner.spawn(device_app::sensor_task().unwrap_or_else(|_| fail("sensor task")));
    spawner.spawn(device_app::link_stats_task().unwrap_or_else(|_| fail("link task")));
    let (mut rx_buf, mut tx_buf) = ([0u8; device_app::MQTT_RX], [0u8; device_app::MQTT_TX]);
    let why = device_app::mqtt_connector_durable(
        (rx, tx),
        &mut rx_buf,
        &mut tx_buf,
        &mut flash,
        backlog,
        boot,
    )
    .await;
    hprintln!("device-mqtt-backlog: connector stopped: {}", why);
    fail("connector stopped")
}

firmware_qemu::handlers!("device-mqtt-backlog");
