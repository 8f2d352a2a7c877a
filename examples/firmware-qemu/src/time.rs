//! An `embassy-time` driver on the Cortex-M SysTick: a 1 kHz tick counted in
//! software (64 bits, never wraps) and a timer queue checked on each tick.
//!
//! A real board would use a low-power timer with a compare alarm; SysTick
//! exists on every Cortex-M, which is what a QEMU demo needs.

use core::cell::{Cell, RefCell};
use core::task::Waker;

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::SYST;
use embassy_sync::blocking_mutex::raw::CriticalSectionRawMutex;
use embassy_sync::blocking_mutex::Mutex;
use embassy_time_driver::Driver;
use embassy_time_queue_utils::Queue;

/// Core clock of QEMU's lm3s6965evb after reset: 200 MHz / 16 from the
/// reset value of the RCC register, 12.5 MHz (measured by the `b3`
/// firmware's calibration under `-icount`: 80 instructions per SysTick tick
/// at 1 ns per instruction).
pub const CORE_HZ: u32 = 12_500_000;

struct State {
    ticks: Cell<u64>,
    next_alarm: Cell<u64>,
    queue: RefCell<Queue>,
}

struct SysTickDriver {
    state: Mutex<CriticalSectionRawMutex, State>,
}

embassy_time_driver::time_driver_impl!(static DRIVER: SysTickDriver = SysTickDriver {
    state: Mutex::new(State {
        ticks: Cell::new(0),
        next_alarm: Cell::new(u64::MAX),
        queue: RefCell::new(Queue::new()),
    }),
});

impl Driver for SysTickDriver {
    fn now(&self) -> u64 {
        self.state.lock(|s| s.ticks.get())
    }

    fn schedule_wake(&self, at: u64, waker: &Waker) {
        self.state.lock(|s| {
            let mut q = s.queue.borrow_mut();
            if q.schedule_wake(at, waker) {
                s.next_alarm.set(q.next_expiration(s.ticks.get()));
            }
        });
    }
}

/// Starts the 1 kHz tick. Call once, before anything awaits a timer.
pub fn init(mut syst: SYST) {
    syst.set_clock_source(SystClkSource::Core);
    syst.set_reload(CORE_HZ / embassy_time_driver::TICK_HZ as u32 - 1);
    syst.clear_current();
    syst.enable_interrupt();
    syst.enable_counter();
}

/// Call from the `SysTick` exception handler.
pub fn on_tick() {
    DRIVER.state.lock(|s| {
        let now = s.ticks.get() + 1;
        s.ticks.set(now);
        if now >= s.next_alarm.get() {
            s.next_alarm.set(s.queue.borrow_mut().next_expiration(now));
        }
    });
}
