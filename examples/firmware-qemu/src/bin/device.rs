//! The demo device: readings, status and commands over the framed-stream
//! connector on UART0. Run under QEMU with `-serial tcp:HOST:PORT` (the
//! gateway does this), or `-serial stdio` to see raw frames.
#![no_std]
#![no_main]

use cortex_m_rt::{exception, ExceptionFrame};
use cortex_m_semihosting::{debug, hprintln};
use embassy_executor::Spawner;
use firmware_qemu::{app, time, uart};

#[embassy_executor::task]
async fn sensor() {
    app::sensor().await
}

#[embassy_executor::task]
async fn control() {
    app::control().await
}

#[embassy_executor::main]
async fn main(spawner: Spawner) {
    let Some(p) = cortex_m::Peripherals::take() else { fail("peripherals taken") };
    time::init(p.SYST);
    let Some((mut rx, mut tx)) = uart::take() else { fail("UART0 taken") };
    hprintln!("device: up, framed connector on UART0");
    spawner.spawn(control().unwrap_or_else(|_| fail("control task")));
    spawner.spawn(sensor().unwrap_or_else(|_| fail("sensor task")));
    loop {
        // A UART never closes; should the connector end anyway, start over
        // (which re-sends the status).
        let e = app::connector(&mut rx, &mut tx).await;
        hprintln!("device: link ended: {}", e);
    }
}

fn fail(what: &str) -> ! {
    hprintln!("device: {}", what);
    debug::exit(debug::EXIT_FAILURE);
    loop {
        cortex_m::asm::wfi();
    }
}

#[exception]
fn SysTick() {
    time::on_tick();
}

#[exception]
unsafe fn DefaultHandler(irqn: i16) {
    if irqn == uart::IRQ as i16 {
        uart::on_interrupt();
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    hprintln!("PANIC {}", info);
    fail("panic")
}

#[exception]
unsafe fn HardFault(ef: &ExceptionFrame) -> ! {
    hprintln!("HARDFAULT {:?}", ef);
    fail("hard fault")
}
