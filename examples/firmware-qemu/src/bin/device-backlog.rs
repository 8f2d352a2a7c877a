//! `device` with its readings durable: each reading is stored in flash as
//! it is written, sent to the host as a tracked frame and removed once
//! the host acknowledged it (the gateway with `--backlog` does so once
//! the reading is in its own backlog), so an outage of the link or of
//! the gateway, or a reset in the middle of one, loses none.
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
        "device-backlog: up, boot {}, framed connector on UART0",
        boot
    );
    spawner.spawn(device_app::control_task().unwrap_or_else(|_| fail("control task")));
    spawner.spawn(device_app::sensor_task().unwrap_or_else(|_| fail("sensor task")));
    device_app::connector_durable(rx, tx, device_app::framed_config(), flash, backlog, boot).await;
    fail("the backlog could not be opened")
}

firmware_qemu::handlers!("device-backlog");
