//! The demo device: readings, status and commands over the framed-stream
//! connector on UART0. Run under QEMU with `-serial tcp:HOST:PORT` (the
//! gateway does this), or `-serial stdio` to see raw frames.
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
    let Some((mut rx, mut tx)) = uart::take() else {
        fail("UART0 taken")
    };
    hprintln!("device: up, framed connector on UART0");
    spawner.spawn(device_app::control_task().unwrap_or_else(|_| fail("control task")));
    spawner.spawn(device_app::sensor_task().unwrap_or_else(|_| fail("sensor task")));
    loop {
        // A UART never closes; should the connector end anyway (the host
        // silent past the heartbeat's timeout), start over (which re-sends
        // the status and a hello with the next birth sequence).
        let e = device_app::connector(&mut rx, &mut tx, device_app::framed_config()).await;
        hprintln!("device: link ended: {}", e);
    }
}

firmware_qemu::handlers!("device");
