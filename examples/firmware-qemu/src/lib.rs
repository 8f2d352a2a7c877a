//! The demo device's firmware pieces for QEMU's `lm3s6965evb`, shared by
//! the binaries in `src/bin`:
//!
//! - `device`: the demo device: readings, status and commands linked over
//!   the framed-stream connector on UART0 (the gateway's other end);
//! - `selftest`: aimdb-core checks plus the same device app against a
//!   scripted peer over an in-memory pipe; exits QEMU with 0 or 1;
//! - `device-mqtt` / `device-mqtt-tls`: the demo device speaking MQTT
//!   itself on UART0 (QEMU connects it to a broker's port), the second
//!   over TLS 1.3;
//! - `footprint`: N or 2N routes, to measure the RAM cost of one route;
//! - `b3`: instructions per operation of the hot paths under QEMU's
//!   instruction counting (aimdb-bench's `b3_on_target` runs and gates it),
//!   and `b3-tls`, its MQTT-over-TLS row (with [`measure`] and
//!   [`tls_peer`]).
//!
//! No heap: no allocator is linked.
#![no_std]

pub mod flash;
pub mod host;
pub mod measure;
pub mod time;
pub mod tls_peer;
pub mod uart;

use cortex_m_semihosting::debug;

/// Ends the program: QEMU exits with `code` through semihosting; on a
/// board without a debugger the core parks.
pub fn exit(code: debug::ExitStatus) -> ! {
    debug::exit(code);
    loop {
        cortex_m::asm::wfi();
    }
}

/// Ends the program with exit code 1.
pub fn fail() -> ! {
    exit(debug::EXIT_FAILURE)
}

/// Defines a binary's `fail(what) -> !` (prints `NAME: what` over
/// semihosting and exits QEMU with 1) and its exception handlers: SysTick
/// to the time driver ([`time::on_tick`]; harmless in a binary that never
/// enables the SysTick interrupt), device interrupts to [`on_interrupt`],
/// a panic or a hard fault printed, then `fail`.
#[macro_export]
macro_rules! handlers {
    ($name:literal) => {
        #[allow(dead_code)]
        fn fail(what: &str) -> ! {
            cortex_m_semihosting::hprintln!("{}: {}", $name, what);
            $crate::fail()
        }

        #[cortex_m_rt::exception]
        fn SysTick() {
            $crate::time::on_tick();
        }

        #[cortex_m_rt::exception]
        unsafe fn DefaultHandler(irqn: i16) {
            $crate::on_interrupt(irqn);
        }

        #[panic_handler]
        fn panic(info: &core::panic::PanicInfo) -> ! {
            cortex_m_semihosting::hprintln!("PANIC {}", info);
            fail("panic")
        }

        #[cortex_m_rt::exception]
        unsafe fn HardFault(ef: &cortex_m_rt::ExceptionFrame) -> ! {
            cortex_m_semihosting::hprintln!("HARDFAULT {:?}", ef);
            fail("hard fault")
        }
    };
}

/// Routes device interrupts (cortex-m-rt without a PAC sends every line to
/// `DefaultHandler`, which each binary forwards here).
pub fn on_interrupt(irqn: i16) {
    if irqn == uart::IRQ as i16 {
        uart::on_interrupt();
    }
}
